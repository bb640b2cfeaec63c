"""Where attacks run: a process of their own, confined."""
