"""The edges that show numbers: the report's study and its rendering, figures, and unit formatting."""
