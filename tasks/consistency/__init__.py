"""Combinatorial consistency testing of LLMs (KomMKonLLM; DESIGN.md, Method 4)."""
