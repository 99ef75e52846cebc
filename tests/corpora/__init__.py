"""Test data: the adversarial corpora (`adversarial*.py`, each case a small graph with the outcome
normfuse must give, pinned in `adversarial_outcomes.json`) and other projects' norm-fusion test
cases rebuilt as graphs (`foreign*.py`). Run by `tests/test_adversarial*.py` and
`tests/test_foreign_suites.py`; `cd tests && PYTHONPATH=.. python -m corpora.adversarial --list`
lists them."""
