"""Message stores: where persistent messages and definitions live across restarts."""
