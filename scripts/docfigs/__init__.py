"""The figures that README.md and docs/ quote, one module per docs page; ``scripts/docs_figures.py``
names them (``FIGURES``) and prints them."""
