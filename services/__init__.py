"""Standalone services that run beside Brain: the scripted model provider and the tool services."""
