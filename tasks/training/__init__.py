"""The training room: fine-tuning that methods share (no method imports another's training code).

``sentiment``: the MiniLM SST-2 classifier (the ``train-sentiment`` stage) and its continued
fine-tuning (AdaTest's debugging loop); ``common``: thread caps and model folders written whole.
"""
