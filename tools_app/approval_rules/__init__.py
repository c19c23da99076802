"""The admin's approval rules (admin.py); what they mean is foundation.hostconfig.approvals', how
calls are matched against them tools_app.invocation.approvals'."""
