"""``python -m operators``: run the dralloc operator (all controllers, webhook, leader election)."""

from operators.process import main

if __name__ == "__main__":
    main()
