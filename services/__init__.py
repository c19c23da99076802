"""Standalone services that run beside Brain: tool services and the scripted model provider."""
