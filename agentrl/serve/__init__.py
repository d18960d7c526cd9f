"""``python -m agentrl.serve``: a trained checkpoint behind the OpenAI-compatible endpoint, for inference.

``cli`` builds the engine, the run's tool-call format and, with ``--execute-tools``, the run's
tools, and serves ``/v1/chat/completions`` until stopped; ``tool_loop`` answers one request
with the whole agent loop on the server (the model's calls run there, the reply carries the
final answer and every call it made).
"""
