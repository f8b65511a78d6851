"""Airline reservations: customers, scheduled flights, reservations, payments and travel credit."""

from typing import TypedDict


class FlightInfo(TypedDict):
    flight_id: str
    flight_number: str
    origin: str
    destination: str
    date: str
    departure_time: str
    status: str  # "scheduled" | "departed" | "cancelled"
    seats_available: dict  # cabin -> seats left
    prices: dict  # cabin -> fare per passenger


class ReservationInfo(TypedDict):
    reservation_id: str
    customer_id: str
    flight_id: str
    cabin: str  # "basic_economy" | "economy" | "business"
    passengers: list
    status: str  # "confirmed" | "cancelled"
    booked_date: str
    payment_method: str  # "card" | "travel_credit"
    total_paid: float
    checked_bags: int
    insurance: bool


CABINS = ("basic_economy", "economy", "business")
CABIN_RANK = {"basic_economy": 0, "economy": 1, "business": 2}
FREE_BAGS_PER_PASSENGER = {"regular": 0, "silver": 1, "gold": 2}
BAG_FEE = 35.0
MAX_BAGS_PER_PASSENGER = 3
INSURANCE_PRICE_PER_PASSENGER = 30.0


class AirlineReservations:
    def __init__(self, init_config: dict):
        """Create the state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2025-01-01")
        self.customers: dict[str, dict] = init_config.get("customers", {})
        self.flights: dict[str, FlightInfo] = init_config.get("flights", {})
        self.reservations: dict[str, ReservationInfo] = init_config.get("reservations", {})
        self.payments: dict[str, dict] = init_config.get("payments", {})

    # ------------------------------------------------------------------ helpers

    def _next_id(self, prefix: str, existing: dict) -> str:
        number = len(existing) + 1
        while f"{prefix}{number:04d}" in existing:
            number += 1
        return f"{prefix}{number:04d}"

    def _record_payment(self, reservation_id: str, customer_id: str, method: str, amount: float, kind: str) -> str:
        payment_id = self._next_id("PAY", self.payments)
        self.payments[payment_id] = {
            "payment_id": payment_id,
            "reservation_id": reservation_id,
            "customer_id": customer_id,
            "method": method,
            "amount": round(amount, 2),
            "kind": kind,
            "date": self.current_date,
        }
        return payment_id

    def _open_reservation(self, reservation_id: str) -> tuple:
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return None, {"success": False, "error": f"No reservation with id {reservation_id}."}
        if reservation["status"] != "confirmed":
            return None, {
                "success": False,
                "error": f"Reservation {reservation_id} is {reservation['status']}.",
            }
        flight = self.flights[reservation["flight_id"]]
        if flight["status"] == "departed":
            return None, {"success": False, "error": f"Flight {flight['flight_id']} has already departed."}
        return reservation, None

    # ------------------------------------------------------------------ queries

    def find_customer_by_email(self, email: str) -> dict:
        """Find a customer profile by email address (case-insensitive).

        Args:
            email: The customer's email address.
        """
        wanted = email.strip().lower()
        for customer in self.customers.values():
            if customer["email"].lower() == wanted:
                return {"success": True, "data": customer}
        return {"success": False, "error": f"No customer with email {email}."}

    def find_customers_by_name(self, name: str) -> dict:
        """List customers whose name contains the given text (case-insensitive).

        Args:
            name: Full or partial name.
        """
        wanted = name.strip().lower()
        matches = [c for c in self.customers.values() if wanted in c["name"].lower()]
        if not matches:
            return {"success": False, "error": f"No customer named like {name}."}
        return {"success": True, "data": matches}

    def get_customer(self, customer_id: str) -> dict:
        """Get a customer's profile: membership tier and travel-credit balance.

        Args:
            customer_id: The customer's id, e.g. "C-101".
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {"success": True, "data": customer}

    def search_flights(self, origin: str, destination: str, date: str) -> dict:
        """List flights between two airports on a date, with seats left and fares per cabin.

        Args:
            origin: Departure airport code, e.g. "JFK".
            destination: Arrival airport code, e.g. "LAX".
            date: Travel date, YYYY-MM-DD.
        """
        found = [
            f
            for f in self.flights.values()
            if f["origin"] == origin.strip().upper()
            and f["destination"] == destination.strip().upper()
            and f["date"] == date.strip()
        ]
        return {"success": True, "data": sorted(found, key=lambda f: f["departure_time"])}

    def get_flight(self, flight_id: str) -> dict:
        """Get one flight's details.

        Args:
            flight_id: The flight's id, e.g. "F-UA100-0312".
        """
        flight = self.flights.get(flight_id)
        if flight is None:
            return {"success": False, "error": f"No flight with id {flight_id}."}
        return {"success": True, "data": flight}

    def list_customer_reservations(self, customer_id: str) -> dict:
        """List every reservation of a customer.

        Args:
            customer_id: The customer's id.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        found = [r for r in self.reservations.values() if r["customer_id"] == customer_id]
        return {"success": True, "data": found}

    def get_reservation(self, reservation_id: str) -> dict:
        """Get one reservation's details.

        Args:
            reservation_id: The reservation's id, e.g. "RES0001".
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        return {"success": True, "data": reservation}

    # ------------------------------------------------------------------ state changes

    def book_reservation(
        self,
        customer_id: str,
        flight_id: str,
        cabin: str,
        passenger_names: list[str],
        payment_method: str,
        insurance: bool = False,
    ) -> dict:
        """Book seats on a flight for one or more passengers.

        Args:
            customer_id: The customer who pays and owns the reservation.
            flight_id: The flight to book.
            cabin: "basic_economy", "economy" or "business".
            passenger_names: Full names of the travellers.
            payment_method: "card" (card on file) or "travel_credit" (must cover the whole amount).
            insurance: Whether to add travel insurance (30.00 per passenger).
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        flight = self.flights.get(flight_id)
        if flight is None:
            return {"success": False, "error": f"No flight with id {flight_id}."}
        if flight["status"] != "scheduled":
            return {
                "success": False,
                "error": f"Flight {flight_id} is {flight['status']} and cannot be booked.",
            }
        if cabin not in CABINS:
            return {"success": False, "error": f"Unknown cabin {cabin}; use one of {', '.join(CABINS)}."}
        names = [n.strip() for n in passenger_names if n.strip()]
        if not names:
            return {"success": False, "error": "At least one passenger is required."}
        if flight["seats_available"][cabin] < len(names):
            return {
                "success": False,
                "error": f"Only {flight['seats_available'][cabin]} {cabin} seat(s) left.",
            }
        total = flight["prices"][cabin] * len(names)
        if insurance:
            total += INSURANCE_PRICE_PER_PASSENGER * len(names)
        total = round(total, 2)
        if payment_method == "travel_credit":
            if customer["travel_credit"] < total:
                return {
                    "success": False,
                    "error": f"Travel credit {customer['travel_credit']:.2f} does not cover {total:.2f}.",
                }
        elif payment_method != "card":
            return {"success": False, "error": "Payment method must be 'card' or 'travel_credit'."}
        if payment_method == "travel_credit":
            customer["travel_credit"] = round(customer["travel_credit"] - total, 2)
        flight["seats_available"][cabin] -= len(names)
        reservation_id = self._next_id("RES", self.reservations)
        self.reservations[reservation_id] = {
            "reservation_id": reservation_id,
            "customer_id": customer_id,
            "flight_id": flight_id,
            "cabin": cabin,
            "passengers": names,
            "status": "confirmed",
            "booked_date": self.current_date,
            "payment_method": payment_method,
            "total_paid": total,
            "checked_bags": 0,
            "insurance": bool(insurance),
        }
        self._record_payment(reservation_id, customer_id, payment_method, total, "booking")
        return {
            "success": True,
            "message": f"Reservation {reservation_id} booked, {total:.2f} charged.",
            "data": reservation_id,
        }

    def change_flight(self, reservation_id: str, new_flight_id: str) -> dict:
        """Move a reservation to another flight on the same route, keeping the same cabin.

        A higher fare is charged to the card on file; a lower fare is returned as travel credit. Basic
        economy reservations cannot be changed.

        Args:
            reservation_id: The reservation to change.
            new_flight_id: The flight to move to (same origin and destination).
        """
        reservation, error = self._open_reservation(reservation_id)
        if error is not None:
            return error
        if reservation["cabin"] == "basic_economy":
            return {"success": False, "error": "Basic economy reservations cannot be changed."}
        old_flight = self.flights[reservation["flight_id"]]
        new_flight = self.flights.get(new_flight_id)
        if new_flight is None:
            return {"success": False, "error": f"No flight with id {new_flight_id}."}
        if new_flight_id == old_flight["flight_id"]:
            return {"success": False, "error": "The reservation is already on that flight."}
        if (new_flight["origin"], new_flight["destination"]) != (
            old_flight["origin"],
            old_flight["destination"],
        ):
            return {"success": False, "error": "A flight change must keep the same origin and destination."}
        if new_flight["status"] != "scheduled":
            return {"success": False, "error": f"Flight {new_flight_id} is {new_flight['status']}."}
        cabin = reservation["cabin"]
        count = len(reservation["passengers"])
        if new_flight["seats_available"][cabin] < count:
            return {"success": False, "error": f"Flight {new_flight_id} has no {count} {cabin} seat(s) left."}
        difference = round((new_flight["prices"][cabin] - old_flight["prices"][cabin]) * count, 2)
        customer = self.customers[reservation["customer_id"]]
        old_flight["seats_available"][cabin] += count
        new_flight["seats_available"][cabin] -= count
        reservation["flight_id"] = new_flight_id
        reservation["total_paid"] = round(reservation["total_paid"] + difference, 2)
        if difference > 0:
            self._record_payment(reservation_id, customer["customer_id"], "card", difference, "fare_difference")
        elif difference < 0:
            customer["travel_credit"] = round(customer["travel_credit"] - difference, 2)
            self._record_payment(
                reservation_id, customer["customer_id"], "travel_credit", difference, "fare_difference"
            )
        return {
            "success": True,
            "message": f"Reservation {reservation_id} moved to {new_flight_id}; fare difference {difference:.2f}.",
        }

    def upgrade_cabin(self, reservation_id: str, new_cabin: str) -> dict:
        """Upgrade a reservation to a higher cabin on the same flight; the card pays the fare difference.

        Args:
            reservation_id: The reservation to upgrade.
            new_cabin: "economy" or "business"; must be higher than the current cabin.
        """
        reservation, error = self._open_reservation(reservation_id)
        if error is not None:
            return error
        if new_cabin not in CABINS:
            return {"success": False, "error": f"Unknown cabin {new_cabin}."}
        if CABIN_RANK[new_cabin] <= CABIN_RANK[reservation["cabin"]]:
            return {"success": False, "error": "Only upgrades to a higher cabin are allowed."}
        flight = self.flights[reservation["flight_id"]]
        count = len(reservation["passengers"])
        if flight["seats_available"][new_cabin] < count:
            return {"success": False, "error": f"Not enough {new_cabin} seats on {flight['flight_id']}."}
        difference = round((flight["prices"][new_cabin] - flight["prices"][reservation["cabin"]]) * count, 2)
        flight["seats_available"][reservation["cabin"]] += count
        flight["seats_available"][new_cabin] -= count
        reservation["cabin"] = new_cabin
        reservation["total_paid"] = round(reservation["total_paid"] + difference, 2)
        self._record_payment(reservation_id, reservation["customer_id"], "card", difference, "upgrade")
        return {
            "success": True,
            "message": f"Reservation {reservation_id} upgraded to {new_cabin}; {difference:.2f} charged.",
        }

    def cancel_reservation(self, reservation_id: str) -> dict:
        """Cancel a reservation and refund it according to the refund policy.

        Full refund to the original payment method when booked today, insured, or the flight was cancelled
        by the airline; otherwise economy and business are refunded as travel credit, and basic economy cannot
        be cancelled.

        Args:
            reservation_id: The reservation to cancel.
        """
        reservation, error = self._open_reservation(reservation_id)
        if error is not None:
            return error
        flight = self.flights[reservation["flight_id"]]
        customer = self.customers[reservation["customer_id"]]
        full_refund = (
            reservation["booked_date"] == self.current_date
            or reservation["insurance"]
            or flight["status"] == "cancelled"
        )
        if not full_refund and reservation["cabin"] == "basic_economy":
            return {
                "success": False,
                "error": "Basic economy reservations without insurance can only be cancelled on the day of booking.",
            }
        amount = reservation["total_paid"]
        method = reservation["payment_method"] if full_refund else "travel_credit"
        if method == "travel_credit":
            customer["travel_credit"] = round(customer["travel_credit"] + amount, 2)
        if flight["status"] == "scheduled":
            flight["seats_available"][reservation["cabin"]] += len(reservation["passengers"])
        reservation["status"] = "cancelled"
        self._record_payment(reservation_id, customer["customer_id"], method, -amount, "refund")
        return {
            "success": True,
            "message": f"Reservation {reservation_id} cancelled; {amount:.2f} refunded to {method}.",
        }

    def add_checked_bags(self, reservation_id: str, bags: int) -> dict:
        """Add checked bags to a reservation.

        Each passenger gets free bags by membership tier (regular 0, silver 1, gold 2); further
        bags cost 35.00 each on the card; at most 3 checked bags per passenger.

        Args:
            reservation_id: The reservation.
            bags: How many bags to add (in total for the reservation).
        """
        reservation, error = self._open_reservation(reservation_id)
        if error is not None:
            return error
        if bags < 1:
            return {"success": False, "error": "Add at least one bag."}
        count = len(reservation["passengers"])
        new_total = reservation["checked_bags"] + bags
        if new_total > MAX_BAGS_PER_PASSENGER * count:
            return {
                "success": False,
                "error": f"At most {MAX_BAGS_PER_PASSENGER} checked bags per passenger.",
            }
        tier = self.customers[reservation["customer_id"]]["membership"]
        free = FREE_BAGS_PER_PASSENGER.get(tier, 0) * count
        paid_before = max(0, reservation["checked_bags"] - free)
        paid_after = max(0, new_total - free)
        fee = round((paid_after - paid_before) * BAG_FEE, 2)
        reservation["checked_bags"] = new_total
        if fee > 0:
            reservation["total_paid"] = round(reservation["total_paid"] + fee, 2)
            self._record_payment(reservation_id, reservation["customer_id"], "card", fee, "baggage")
        return {"success": True, "message": f"{bags} bag(s) added to {reservation_id}; fee {fee:.2f}."}

    def update_passenger_name(self, reservation_id: str, old_name: str, new_name: str) -> dict:
        """Correct the spelling of a passenger's name on a reservation.

        Args:
            reservation_id: The reservation.
            old_name: The name as currently on the reservation.
            new_name: The corrected full name.
        """
        reservation, error = self._open_reservation(reservation_id)
        if error is not None:
            return error
        if old_name not in reservation["passengers"]:
            return {"success": False, "error": f"No passenger named {old_name} on {reservation_id}."}
        if not new_name.strip():
            return {"success": False, "error": "The new name must not be empty."}
        index = reservation["passengers"].index(old_name)
        reservation["passengers"][index] = new_name.strip()
        return {"success": True, "message": f"Passenger renamed to {new_name.strip()}."}

    def add_travel_insurance(self, reservation_id: str) -> dict:
        """Add travel insurance (30.00 per passenger, charged to the card); only on the day of booking.

        Args:
            reservation_id: The reservation.
        """
        reservation, error = self._open_reservation(reservation_id)
        if error is not None:
            return error
        if reservation["insurance"]:
            return {"success": False, "error": f"Reservation {reservation_id} is already insured."}
        if reservation["booked_date"] != self.current_date:
            return {"success": False, "error": "Insurance can only be added on the day of booking."}
        fee = round(INSURANCE_PRICE_PER_PASSENGER * len(reservation["passengers"]), 2)
        reservation["insurance"] = True
        reservation["total_paid"] = round(reservation["total_paid"] + fee, 2)
        self._record_payment(reservation_id, reservation["customer_id"], "card", fee, "insurance")
        return {"success": True, "message": f"Insurance added to {reservation_id}; {fee:.2f} charged."}

    def update_contact_phone(self, customer_id: str, phone: str) -> dict:
        """Change the phone number on a customer's profile.

        Args:
            customer_id: The customer's id.
            phone: The new phone number.
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        if not phone.strip():
            return {"success": False, "error": "The phone number must not be empty."}
        customer["phone"] = phone.strip()
        return {"success": True, "message": f"Phone of {customer_id} updated."}

    def get_baggage_allowance(self, reservation_id: str) -> dict:
        """Show how many checked bags a reservation has, how many are free and how many more can be added.

        Args:
            reservation_id: The reservation.
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        count = len(reservation["passengers"])
        tier = self.customers[reservation["customer_id"]]["membership"]
        data = {
            "checked_bags": reservation["checked_bags"],
            "free_bags": FREE_BAGS_PER_PASSENGER.get(tier, 0) * count,
            "max_bags": MAX_BAGS_PER_PASSENGER * count,
            "fee_per_extra_bag": BAG_FEE,
        }
        return {"success": True, "data": data}

    def search_reservations_by_passenger(self, passenger_name: str, flight_id: str | None = None) -> dict:
        """Find reservations that list a passenger (case-insensitive substring match).

        Args:
            passenger_name: Full or partial passenger name.
            flight_id: Restrict to one flight (optional).
        """
        wanted = passenger_name.strip().lower()
        found = [
            r
            for r in self.reservations.values()
            if any(wanted in p.lower() for p in r["passengers"]) and (flight_id is None or r["flight_id"] == flight_id)
        ]
        return {"success": True, "data": found}
