"""Evaluation steps: DPR-style answer matching, top-K accuracy and qrels-based metrics."""
