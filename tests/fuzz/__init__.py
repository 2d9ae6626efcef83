"""The fuzz suite: random small modules exported in both flavours (issue #13, item 4)."""
