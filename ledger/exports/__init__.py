"""Verifiable exports of the notification log (JSONL, Parquet) and their verification."""
