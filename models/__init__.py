"""Dense retrievers and their training: bi-encoder variants, TASER, DESIRE-ME, objectives, trainer.

The stable entry points live in `models.retriever` (`Retriever`, `load_retriever`,
`create_retriever`) and `models.trainer` (`Trainer`, `TrainingConfig`, `TrainingExample`).
"""
