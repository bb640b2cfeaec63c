"""``testbed bench``: what each protocol, the transcript, the guard and the sandbox cost."""
