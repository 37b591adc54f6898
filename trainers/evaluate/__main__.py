"""``python -m trainers.evaluate``: every arm on the same test tasks (the evaluator in ``run.py``)."""
import sys

from trainers.evaluate.run import main, renamed_arm_overrides

if __name__ == "__main__":
    sys.argv[1:] = renamed_arm_overrides(sys.argv[1:])
    main()
