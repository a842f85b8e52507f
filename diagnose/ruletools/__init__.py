"""`diagnose rules list|show|test|lint|new|docs`."""
