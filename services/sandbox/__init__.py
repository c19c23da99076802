"""The standalone sandbox tool service (`python -m services.sandbox`): the toolkits/sandbox tools
over the external tools protocol, for operators who run tools outside Brain."""
