"""Reading a study back: build (the report document), schema (its pinned shape), html and
plots, progress (the live panel of a sweep), export (the chosen config as launcher files).

    doc = collect(study)                       # autotune.report.build
    print_report(doc, console)
"""
