"""Conversations kept by the companion: the chat page's list, and what a follow-up retrieves.

:mod:`companion.conversations.store` keeps them in their own SQLite file under
the companion's home (``<home>/conversations.sqlite3``, mode 0600 like
everything there); :mod:`companion.conversations.query` builds the retrieval
query of a follow-up question from the conversation's earlier turns.
"""
