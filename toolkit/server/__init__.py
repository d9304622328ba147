"""Launching and supervising tritonserver."""
