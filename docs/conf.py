"""Sphinx configuration: offline build, autosummary API, numpydoc, gallery."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import sklearn_fed  # noqa: E402

project = "sklearn-fed"
author = "sklearn-fed developers"
release = sklearn_fed.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

autosummary_generate = True
# Methods every scikit-learn estimator has (documented by scikit-learn, whose
# docstrings point into its own glossary) are left out of our API pages.
autodoc_default_options = {
    "members": True,
    "inherited-members": False,
    "exclude-members": (
        "set_fit_request,set_partial_fit_request,set_score_request,"
        "set_transform_request,set_inverse_transform_request,"
        "get_metadata_routing,score,get_params,set_params"
    ),
}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
html_theme = "pydata_sphinx_theme"
html_theme_options = {"navigation_with_keys": False}
# MathJax is loaded from a CDN by the browser when a page is viewed; the build
# itself stays offline.

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py|demo_",
    "download_all_examples": False,
    "within_subsection_order": "FileNameSortKey",
}
