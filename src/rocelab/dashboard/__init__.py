"""`invoke dashboard`: a live browser view of a running lab.

    model     pure: a lab's state and two readings → one frame (the view model)
    sampler   polls the agents (runtime.readings.read_lab, as Prometheus and the run report do)
    server    Starlette routes, SSE, the snapshot; plotly.js from the installed package
    serving   the small files through which `run`/`traffic` find a serving dashboard
    page.html the page: plotly.js for the topology and charts, plain DOM for bars and badges
"""
