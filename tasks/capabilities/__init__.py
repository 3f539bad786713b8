"""Capability testing of sentiment classifiers (S²LCT): specifications, seed search, CFG-guided expansion."""
