"""What a dataset is and how its bytes are read: manifests, folders, and object storage."""
