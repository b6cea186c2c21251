"""Reading an archive as hostile: the walk, the one reader of its files, the one strict parse.

Below both the archive checks (:mod:`verify._archive`) and the science checks
(:mod:`verify._science`), which import it and never each other's readers:

=========  =========================================================================
``names``  the archive's fixed names and small helpers
``files``  :class:`~verify._reader.files.ArchiveFiles`: the walk, the reader, the limits
``events`` :class:`~verify._reader.events.EventReader`: the strict parse of the events
=========  =========================================================================
"""
