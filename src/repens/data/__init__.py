"""Data sets: toy generators (Appendix G.2/G.3); image and UCI loaders come later."""
