"""Message search: any user string turned into a plan (``plan``), run over the word index, the
trigram index or a bounded scan (``run``), ranked (``rank``) and shown as hits with snippets and
context (``hits``); ``textfold`` folds text exactly as the indexes do."""
