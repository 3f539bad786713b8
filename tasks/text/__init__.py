"""Text utilities shared by the methods: WordNet access (more to come: tokenising, mutation)."""
