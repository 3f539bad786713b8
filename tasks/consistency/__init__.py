"""Combinatorial consistency testing of LLMs (KomMKonLLM)."""
