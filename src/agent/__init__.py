"""(lead fills in the public API at integration.)"""
