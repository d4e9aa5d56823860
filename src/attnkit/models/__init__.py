"""attnkit.models"""
