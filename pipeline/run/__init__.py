"""Running a plan: the executor, the clusters it runs on (Ray, or in process), recording to MLflow
and the database, the live view.
"""
