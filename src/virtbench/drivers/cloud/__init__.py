"""Cloud instances through the EC2 API (boto3): the API client and tags (`api`), state polling
(`poller`), the guest side of volumes (`volumes`) and removal of tagged leftovers (`cleanup`).
The driver itself is drivers/cloud/driver.py; SSH to the instances is machines/ssh.py."""
