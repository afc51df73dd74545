"""Permission-exact retrieval: who may read which document, who is asking, and the index a
principal sees, which is the index of the documents it may read (views.py), never more."""
