"""Tools for plugin authors: scaffolding and the protocol scorecard."""
