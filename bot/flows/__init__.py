"""The GitHub side's flows, one module each: ``plan`` (a pull request to GPU tasks), ``progress``
(the check run while they run), ``publish`` (their results to a review, a summary and the check
run), ``track`` (what became of each suggestion) and ``command`` (``/kernelize`` comments).

Each flow gathers facts (GitHub, the database), decides with pure functions of those facts, then
acts. It is handed what it works with (:class:`bot.flows.common.Services`); ``bot/tasks.py``, the
Celery edge, builds that from the task's arguments.
"""
