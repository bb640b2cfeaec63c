"""The scenario: its schema, YAML loading with line numbers, limits and sweep cells."""
