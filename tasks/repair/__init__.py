"""COSTELLO §5.4 repair, method side: which triples, the re-test, Table 3 (the training loop is ``lingtest.tasks.training.embedding_repair``)."""
