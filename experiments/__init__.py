"""Command-line experiments: run each as `python -m experiments.<name> --flags`."""
