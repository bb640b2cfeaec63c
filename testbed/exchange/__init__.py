"""The exchange: envelopes, payloads, the bus and its engines, the transcript, the guard and the privacy ledger."""
