"""What a run writes and reads back: its directory, checkpoints, summary and loggers."""
