"""``python -m trainers.evaluate``: every arm on the same test tasks (the evaluator in ``run.py``)."""
from trainers.evaluate.run import main

if __name__ == "__main__":
    main()
