"""An OpenAI-compatible rollout endpoint: agents written against a chat API roll out token-exact.

``server.ChatEndpoint`` serves chat completions over the run's engine; ``episode.Episode``
records one agent episode's requests as a trajectory of the run's own ids (steps where the
agent's conversation is not an extension of what it held); ``wire`` reads and writes the JSON.
"""
