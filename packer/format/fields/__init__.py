"""Samples as sets of named, typed fields (issue 27): field types and their registry, the schema a
manifest records, and the record that holds one sample's fields.

Every module here is internal for now; the public names come with writing and reading datasets
with fields.
"""
