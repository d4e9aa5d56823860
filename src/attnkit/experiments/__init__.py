"""attnkit.experiments"""
