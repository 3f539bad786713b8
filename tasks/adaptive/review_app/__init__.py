"""``lingtest review``: AdaTest's review loop in the browser (``session``: the tree, models,
suggestions and undo; ``app``: the FastAPI app, templates and static script)."""
