"""Made-up websites and Mind2Web-like tasks on them: page snapshots, gold operations, positive elements.

Seven kinds of site (airline, restaurant booking, car rental, hotel, store, tickets, jobs), each
with a few task templates. A task is a sequence of steps; each step has the page before it (the
site's header and footer, the form or list it is on, and the step's target), Mind2Web's operation
(CLICK, TYPE or SELECT with its value) and the positive elements (the target, and the text span
inside a button, as Mind2Web often marks both). Every page gets fresh backend ids, as Mind2Web's
snapshots do. `purpose` says what a step is for in words: the descriptive subgoal.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from coalign.envs.web import Element, GoldStep

CITIES = (
    ("Brennholt", "BRH"), ("Calvaro", "CLV"), ("Dunmere", "DNM"), ("Esterholm", "EST"), ("Farrowgate", "FRG"),
    ("Harkness", "HRK"), ("Istrava", "IST"), ("Jorvale", "JRV"), ("Kelmarsh", "KLM"), ("Lundquay", "LDQ"),
    ("Marisport", "MSP"), ("Norhaven", "NRH"), ("Ostrel", "OSL"), ("Pellmoor", "PLM"), ("Quenby", "QNB"),
    ("Rathmore", "RTM"), ("Solvik", "SLV"), ("Tarnwick", "TNW"), ("Valdoro", "VLD"), ("Wexholm", "WXH"),
)  # fmt: skip
MONTHS = ("March", "April", "May", "June", "July", "August", "September", "October")
RESTAURANTS = (
    "The Copper Fig", "Saltmarsh Kitchen", "Juniper Hall", "Little Ember", "The Quiet Heron", "Marigold Table",
    "Olive and Anchor", "Bramble House", "The Blue Lantern", "Cedar and Smoke",
)  # fmt: skip
CUISINES = ("Thai", "Italian", "Mexican", "Korean", "Greek", "Ethiopian", "Vegan", "Seafood")
TIMES = ("5:30 PM", "6:00 PM", "6:30 PM", "7:00 PM", "7:30 PM", "8:00 PM", "8:30 PM")
CAR_CLASSES = ("Economy", "Compact", "Midsize", "SUV", "Minivan", "Luxury")
HOTEL_SORTS = ("Price: low to high", "Guest rating", "Distance from center", "Star rating")
ITEMS = (
    ("rain jacket", ("S", "M", "L", "XL")), ("hiking boots", ("8", "9", "10", "11")),
    ("denim shirt", ("S", "M", "L", "XL")), ("wool beanie", ("One size",)), ("linen pants", ("S", "M", "L")),
    ("running shorts", ("S", "M", "L", "XL")),
)  # fmt: skip
COLORS = ("Black", "Olive", "Navy", "Rust", "Grey", "Sand")
ARTISTS = (
    "The Velvet Orchard", "Mira Solano", "Northbound Echo", "Kasper Wren", "Lanterns of June", "Delia Marsh",
    "The Paper Comets", "Theo Ashgrove",
)  # fmt: skip
VENUES = ("Arena", "Hall", "Amphitheater", "Stadium")
JOBS = ("Data analyst", "Nurse", "Electrician", "Graphic designer", "Accountant", "Chef", "Teacher")
JOB_FILTERS = ("Full-time", "Part-time", "Remote", "Contract")


@dataclass(frozen=True)
class SiteKind:
    """A kind of website: its made-up names and the links every page of it shows."""

    sites: tuple[str, ...]
    nav: tuple[str, ...]


KINDS: dict[str, SiteKind] = {
    "airline": SiteKind(("Skyvane", "Bluecrest Air", "Northwind Airways"), ("Deals", "Travel info", "My trips")),
    "restaurant": SiteKind(("Tablefold", "Dinewell"), ("Near me", "Gift cards", "For restaurants")),
    "cars": SiteKind(("Roadnest", "Wheelhouse Rentals"), ("Locations", "Rental deals", "Manage booking")),
    "hotel": SiteKind(("Staywell", "Harborlight Hotels"), ("Offers", "Rewards", "Groups and meetings")),
    "store": SiteKind(("Kestrel Goods", "Ashfield Outfitters"), ("New arrivals", "Sale", "Store finder")),
    "tickets": SiteKind(("Ticketvale", "Seatwise"), ("Concerts", "Sports", "Theater")),
    "jobs": SiteKind(("Workbridge", "Hirewell"), ("Salaries", "Companies", "Post a job")),
}
FOOTER = ("About us", "Help center", "Privacy policy", "Terms of use")


@dataclass(frozen=True)
class Step:
    """One gold step and what it is for."""

    gold: GoldStep
    target: Element
    purpose: str


@dataclass(frozen=True)
class SiteTask:
    task: str
    website: str
    steps: tuple[Step, ...]


class _Site:
    """Draws one task's pages: fresh backend ids per element, the site's header and footer on every page."""

    def __init__(self, rng: random.Random, kind: SiteKind) -> None:
        self.rng, self.kind = rng, kind
        self.website = rng.choice(kind.sites)
        self.next_id = rng.randrange(100, 5000)
        self.body: list[Element] = []
        self.inner: dict[str, str] = {}  # button id -> id of the text span inside it
        self.steps: list[Step] = []

    def el(self, tag: str, text: str = "", **attributes: str) -> Element:
        element = Element(str(self.next_id), tag, text, tuple(attributes.items()))
        self.next_id += self.rng.randint(1, 9)
        self.body.append(element)
        return element

    def button(self, text: str) -> Element:
        """A button, half the time with its text in a span that counts as the same target."""
        button = self.el("button", text)
        if self.rng.random() < 0.5:
            self.inner[button.id] = self.el("span", text).id
        return button

    def page(self) -> None:
        """Start drawing a new page."""
        self.body, self.inner = [], {}

    def act(self, op: str, target: Element, purpose: str, value: str = "") -> None:
        """Record a step on the page drawn so far, then start the next page."""
        ids = iter(range(self.next_id, self.next_id + 10 * (len(self.kind.nav) + len(FOOTER) + 3), 10))
        header = [
            Element(str(next(ids)), "img", "", (("alt", f"{self.website} logo"),)),
            *(Element(str(next(ids)), "link", text) for text in ("Home", *self.kind.nav)),
            Element(str(next(ids)), "button", "Sign in"),
        ]
        footer = [Element(str(next(ids)), "link", text) for text in FOOTER]
        self.next_id += 10 * (len(self.kind.nav) + len(FOOTER) + 3)
        positives = frozenset({target.id, *([self.inner[target.id]] if target.id in self.inner else [])})
        gold = GoldStep((*header, *self.body, *footer), op, value, positives)
        self.steps.append(Step(gold, target, purpose))
        self.page()

    def done(self, task: str) -> SiteTask:
        return SiteTask(task, self.website, tuple(self.steps))

    # ---- pieces several sites share

    def choose_city(self, city: tuple[str, str], role: str, draw: Callable[[], Element]) -> None:
        """TYPE a city into the field `draw` puts on a page, then CLICK its suggestion ("Brennholt (BRH)")."""
        self.act("TYPE", draw(), f"Enter {city[0]} as the {role}", city[0])
        draw()
        others = self.rng.sample([c for c in CITIES if c != city], 2)
        suggestions = [city, *others]
        self.rng.shuffle(suggestions)
        found = [self.el("option", f"{name} ({code})") for name, code in suggestions]
        self.act("CLICK", found[suggestions.index(city)], f"Pick {city[0]} from the suggestions for the {role}")

    def calendar(self, month: str, day: int) -> Element:
        """A week of a month's days around `day`, as gridcells; returns the day's cell."""
        start = max(1, min(day - self.rng.randint(0, 6), 22))
        cells = [self.el("gridcell", f"{month} {d}") for d in range(start, start + 7)]
        return cells[day - start]


def _date(rng: random.Random, room: int = 0) -> tuple[str, int]:
    """A month and a day that leaves `room` more days in it."""
    return rng.choice(MONTHS), rng.randint(1, 28 - room)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --------------------------------------------------------------------------- airline


def _flights(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["airline"])
    origin, destination = rng.sample(CITIES, 2)
    month, day = _date(rng)
    adults = rng.randint(1, 6)
    one_way = rng.random() < 0.5

    def form() -> dict[str, Element]:
        for tab in ("Flights", "Hotels", "Cars"):
            s.el("tab", tab)
        fields = {"Round trip": s.el("label", "Round trip"), "One way": s.el("label", "One way")}
        fields |= {"From": s.el("combobox", "From"), "To": s.el("combobox", "To"), "Depart": s.button("Depart")}
        s.button("Return")
        return fields | {"Passengers": s.el("select", "Passengers"), "Search": s.button("Search flights")}

    trip = "one-way" if one_way else "round-trip"
    task = f"Find {trip} flights from {origin[0]} to {destination[0]} on {month} {day} for {_plural(adults, 'adult')}."
    if one_way:
        s.act("CLICK", form()["One way"], "Choose a one-way trip")
    s.choose_city(origin, "departure city", lambda: form()["From"])
    s.choose_city(destination, "arrival city", lambda: form()["To"])
    s.act("CLICK", form()["Depart"], "Open the calendar for the departure date")
    form()
    s.act("CLICK", s.calendar(month, day), f"Set {month} {day} as the departure date")
    passengers = form()["Passengers"]
    s.act("SELECT", passengers, f"Set the number of travellers to {adults}", _plural(adults, "adult"))
    s.act("CLICK", form()["Search"], "Start the flight search")
    return s.done(task)


def _flight_status(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["airline"])
    flight = f"{rng.choice('SKBN')}{rng.choice('VWAX')}{rng.randint(100, 999)}"
    month, day = _date(rng)
    s.el("heading", "Where can we take you?")
    status = s.el("link", "Flight status")
    s.el("link", "Baggage")
    s.act("CLICK", status, "Go to the flight status page")
    number = s.el("textbox", "Flight number")
    s.el("textbox", "Departure airport")
    s.act("TYPE", number, f"Enter the flight number {flight}", flight)
    s.el("textbox", "Flight number")
    date = s.button("Travel date")
    s.act("CLICK", date, "Open the calendar for the travel date")
    s.act("CLICK", s.calendar(month, day), f"Set {month} {day} as the travel date")
    s.el("textbox", "Flight number")
    check = s.button("Check status")
    s.act("CLICK", check, "Look up the flight")
    return s.done(f"Check the status of flight {flight} on {month} {day}.")


def _check_in(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["airline"])
    code = "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", k=6))
    surname = rng.choice(("Alder", "Brook", "Castell", "Doyle", "Ferris", "Hale", "Lindqvist", "Moreau", "Okafor"))
    s.el("heading", "Where can we take you?")
    check = s.el("link", "Check in")
    s.el("link", "Flight status")
    s.act("CLICK", check, "Go to online check-in")
    confirmation = s.el("textbox", "Confirmation code")
    s.el("textbox", "Last name")
    s.act("TYPE", confirmation, f"Enter the booking code {code}", code)
    s.el("textbox", "Confirmation code")
    last = s.el("textbox", "Last name")
    s.act("TYPE", last, f"Enter the passenger's surname {surname}", surname)
    s.el("textbox", "Confirmation code")
    s.el("textbox", "Last name")
    find = s.button("Find my trip")
    s.act("CLICK", find, "Look up the booking")
    return s.done(f"Check in for the flight with confirmation code {code} for {surname}.")


# --------------------------------------------------------------------------- restaurant


def _reservation(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["restaurant"])
    place = rng.choice(RESTAURANTS)
    people = rng.randint(2, 8)
    time = rng.choice(TIMES)
    search = s.el("searchbox", "Restaurant, cuisine or location")
    s.button("Let's go")
    s.act("TYPE", search, f"Search for {place}", place)
    shown = [place, *rng.sample([r for r in RESTAURANTS if r != place], 2)]
    rng.shuffle(shown)
    links = [s.el("link", name) for name in shown]
    s.act("CLICK", links[shown.index(place)], f"Open the page of {place}")
    party = s.el("select", "Party size")
    s.el("select", "Time")
    s.act("SELECT", party, f"Set the party size to {people}", f"{people} people")
    s.el("select", "Party size")
    at = s.el("select", "Time")
    s.act("SELECT", at, f"Set the reservation time to {time}", time)
    s.el("select", "Party size")
    s.el("select", "Time")
    find = s.button("Find a table")
    s.act("CLICK", find, "Look for free tables")
    slots = sorted({time, *rng.sample(TIMES, 2)}, key=TIMES.index)
    buttons = [s.button(slot) for slot in slots]
    s.act("CLICK", buttons[slots.index(time)], f"Take the {time} table")
    return s.done(f"Reserve a table for {people} at {place} at {time}.")


def _cuisine(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["restaurant"])
    cuisine, city = rng.choice(CUISINES), rng.choice(CITIES)[0]
    delivery = rng.random() < 0.5
    search = s.el("searchbox", "Restaurant, cuisine or location")
    s.act("TYPE", search, f"Search for {cuisine} food", cuisine)
    s.el("searchbox", "Restaurant, cuisine or location")
    where = s.el("combobox", "Location")
    s.act("TYPE", where, f"Look near {city}", city)
    s.el("searchbox", "Restaurant, cuisine or location")
    s.el("combobox", "Location")
    go = s.button("Let's go")
    s.act("CLICK", go, "Run the search")
    filters = {name: s.el("label", name) for name in ("Delivery", "Takeout", "Outdoor seating", "Open now")}
    wanted = "Delivery" if delivery else "Outdoor seating"
    s.act("CLICK", filters[wanted], f"Keep only places with {wanted.lower()}")
    task = f"Find {cuisine} restaurants in {city} that offer {wanted.lower()}."
    return s.done(task)


# --------------------------------------------------------------------------- cars


def _car_rental(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["cars"])
    city = rng.choice(CITIES)
    days = rng.randint(2, 6)
    month, day = _date(rng, room=days)
    car = rng.choice(CAR_CLASSES)
    time = rng.choice(("9:00 AM", "10:00 AM", "Noon", "2:00 PM", "4:00 PM"))

    def form() -> dict[str, Element]:
        fields = {"where": s.el("combobox", "Pick-up location")}
        s.el("label", "Return to a different location")
        fields |= {"date": s.button("Pick-up date"), "time": s.el("select", "Pick-up time")}
        return fields | {"search": s.button("Search cars")}

    s.choose_city(city, "pick-up location", lambda: form()["where"])
    s.act("CLICK", form()["date"], "Open the calendar for the pick-up date")
    s.act("CLICK", s.calendar(month, day), f"Set {month} {day} as the pick-up date")
    s.act("CLICK", s.calendar(month, day + days), f"Set {month} {day + days} as the return date")
    s.act("SELECT", form()["time"], f"Pick up the car at {time}", time)
    s.act("CLICK", form()["search"], "Look for cars")
    classes = {name: s.el("link", name) for name in CAR_CLASSES}
    s.act("CLICK", classes[car], f"Show only {car} cars")
    article = "an" if car[0] in "AEIOU" else "a"
    return s.done(
        f"Rent {article} {car} car in {city[0]} from {month} {day} to {month} {day + days}, picking it up at {time}."
    )


# --------------------------------------------------------------------------- hotel


def _hotel(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["hotel"])
    city = rng.choice(CITIES)
    nights = rng.randint(1, 5)
    month, day = _date(rng, room=nights)
    guests = rng.randint(1, 4)
    order = rng.choice(HOTEL_SORTS)

    def form() -> dict[str, Element]:
        fields = {"where": s.el("combobox", "Destination"), "dates": s.button("Check-in")}
        s.button("Check-out")
        return fields | {"guests": s.el("select", "Guests"), "search": s.button("Search hotels")}

    s.choose_city(city, "destination", lambda: form()["where"])
    s.act("CLICK", form()["dates"], "Open the calendar for the stay")
    s.act("CLICK", s.calendar(month, day), f"Set {month} {day} as the check-in date")
    s.act("CLICK", s.calendar(month, day + nights), f"Set {month} {day + nights} as the check-out date")
    s.act("SELECT", form()["guests"], f"Set the number of guests to {guests}", _plural(guests, "guest"))
    s.act("CLICK", form()["search"], "Look for hotels")
    sort = s.el("select", "Sort by")
    s.el("label", "Free cancellation")
    s.el("label", "Breakfast included")
    s.act("SELECT", sort, f"Order the hotels by {order.lower()}", order)
    task = (
        f"Find a hotel in {city[0]} for {_plural(guests, 'guest')} from {month} {day} to {month} {day + nights}, "
        f"sorted by {order.lower()}."
    )
    return s.done(task)


# --------------------------------------------------------------------------- store


def _store(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["store"])
    (item, sizes), color = rng.choice(ITEMS), rng.choice(COLORS)
    size = rng.choice(sizes)
    brands = rng.sample(("Fellhart", "Corrie", "Ludlow", "Tamber", "Oakhaven"), 3)
    palette = [*rng.sample([c for c in COLORS if c != color], 2), color]
    rng.shuffle(palette)

    def product() -> dict[str, Element]:
        s.el("heading", f"{brands[0]} {item.title()}")
        fields = {"size": s.el("select", "Size"), **{c: s.el("label", c) for c in palette}}
        s.el("link", "Size guide")
        return fields | {"add": s.button("Add to cart")}

    s.act("TYPE", s.el("searchbox", "Search products"), f"Search the store for a {item}", item)
    s.el("searchbox", "Search products")
    s.act("CLICK", s.button("Search"), "Run the search")
    results = [s.el("link", f"{brand} {item.title()}") for brand in brands]
    s.act("CLICK", results[0], f"Open the {brands[0]} {item}")
    s.act("SELECT", product()["size"], f"Choose size {size}", size)
    s.act("CLICK", product()[color], f"Choose the colour {color.lower()}")
    s.act("CLICK", product()["add"], "Put the item in the cart")
    size_words = f"size {size}" if size != "One size" else "one size"
    return s.done(f"Add a {color.lower()} {brands[0]} {item} in {size_words} to the cart.")


# --------------------------------------------------------------------------- tickets


def _tickets(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["tickets"])
    artist = rng.choice(ARTISTS)
    city, venue = rng.choice(CITIES)[0], rng.choice(VENUES)
    month, day = _date(rng)
    count = rng.randint(1, 6)
    search = s.el("searchbox", "Search artists, teams or venues")
    s.act("TYPE", search, f"Search for {artist}", artist)
    found = [artist, *rng.sample([a for a in ARTISTS if a != artist], 1)]
    links = [s.el("link", name) for name in found]
    s.act("CLICK", links[0], f"Open the page of {artist}")
    shows = [(month, day, city, venue)]
    for other in rng.sample([c for c in CITIES if c[0] != city], 2):
        shows.append((*_date(rng), other[0], rng.choice(VENUES)))
    rng.shuffle(shows)
    events = [s.el("link", f"{m} {d} {c} {v}") for m, d, c, v in shows]
    s.act("CLICK", events[shows.index((month, day, city, venue))], f"Open the {city} show on {month} {day}")
    quantity = s.el("select", "Quantity")
    s.el("label", "Show accessible seats")
    s.act("SELECT", quantity, f"Ask for {count} tickets", _plural(count, "ticket"))
    s.el("select", "Quantity")
    find = s.button("Find tickets")
    s.act("CLICK", find, "Look for seats")
    return s.done(f"Find {_plural(count, 'ticket')} for {artist} at the {city} {venue} on {month} {day}.")


# --------------------------------------------------------------------------- jobs


def _jobs(rng: random.Random) -> SiteTask:
    s = _Site(rng, KINDS["jobs"])
    job, city, kind = rng.choice(JOBS), rng.choice(CITIES), rng.choice(JOB_FILTERS)

    def form() -> dict[str, Element]:
        fields = {"what": s.el("textbox", "Job title or keyword"), "where": s.el("combobox", "City or region")}
        return fields | {"search": s.button("Find jobs")}

    s.act("TYPE", form()["what"], f"Search for {job.lower()} jobs", job)
    s.choose_city(city, "job location", lambda: form()["where"])
    s.act("CLICK", form()["search"], "Run the job search")
    filters = {name: s.el("link", name) for name in JOB_FILTERS}
    s.act("CLICK", filters[kind], f"Keep only {kind.lower()} jobs")
    return s.done(f"Find {kind.lower()} {job.lower()} jobs in {city[0]}.")


TEMPLATES: dict[str, Callable[[random.Random], SiteTask]] = {
    "flights": _flights,
    "flight_status": _flight_status,
    "check_in": _check_in,
    "reservation": _reservation,
    "cuisine": _cuisine,
    "car_rental": _car_rental,
    "hotel": _hotel,
    "store": _store,
    "tickets": _tickets,
    "jobs": _jobs,
}
