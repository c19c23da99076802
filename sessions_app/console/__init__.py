"""The admin's operator console (sessions_app.console.admin)."""
