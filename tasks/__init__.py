"""lingtest's computing side: the methods' tasks (one package per method) over a shared core."""
