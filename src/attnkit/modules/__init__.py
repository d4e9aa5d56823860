"""attnkit.modules"""
