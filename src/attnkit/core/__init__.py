"""attnkit.core"""
