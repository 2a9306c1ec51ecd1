"""The kubeflow controller: Kubeflow v1 jobs (PyTorchJob, TFJob, JAXJob, XGBoostJob) carried out by Trainers."""
