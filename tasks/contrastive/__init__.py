"""Contrastive testing of embedding models (COSTELLO): suites, embeddings, validation, ground truth."""
