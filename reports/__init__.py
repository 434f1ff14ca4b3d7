"""HTML precision reports."""
