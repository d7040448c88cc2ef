"""Transcripts across the data dir's edge: transcript files into the spool (``quill
import``), sessions out of the store (``quill export``), and the stable batch ids every
pushed or imported op carries."""
