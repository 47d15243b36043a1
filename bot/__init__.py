"""The GitHub side: webhooks, tasks, publishing, and the command line."""
