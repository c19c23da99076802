"""The session runtime: the engine, its residency, the session actors and their collaborators.

Built by the application object (brainsite.application); nothing here is process-global.
"""
