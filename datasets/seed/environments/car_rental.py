from datetime import date
from typing import TypedDict


class CustomerInfo(TypedDict):
    customer_id: str
    name: str
    email: str
    phone: str
    date_of_birth: str
    license_number: str
    license_expiry: str
    loyalty_tier: str  # "standard" | "gold"


class BranchInfo(TypedDict):
    branch_id: str
    name: str
    city: str


class VehicleInfo(TypedDict):
    vehicle_id: str
    make: str
    model: str
    car_class: str  # "economy" | "compact" | "suv" | "premium" | "van"
    branch_id: str
    status: str  # "available" | "rented" | "maintenance"
    daily_rate: float
    odometer_km: int


class ReservationInfo(TypedDict):
    reservation_id: str
    customer_id: str
    vehicle_id: str
    pickup_branch_id: str
    return_branch_id: str
    start_date: str
    end_date: str
    status: str  # "confirmed" | "active" | "completed" | "cancelled"
    extras: list[str]
    total_price: float
    cancellation_fee: float
    odometer_out: int | None
    odometer_in: int | None


EXTRA_DAILY_PRICES = {"gps": 8.0, "child_seat": 10.0, "additional_driver": 12.0}
RESTRICTED_CLASSES_UNDER_25 = ("premium", "van")
ONE_WAY_FEE = 75.0
GOLD_DISCOUNT = 0.10
MAX_RENTAL_DAYS = 30
FREE_CANCELLATION_DAYS = 2
BLOCKING_STATUSES = ("confirmed", "active")


def _parse_date(value: str) -> date | None:
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError):
        return None


def _age_on(date_of_birth: str, on: date) -> int:
    born = date.fromisoformat(date_of_birth)
    return on.year - born.year - ((on.month, on.day) < (born.month, born.day))


class CarRental:
    def __init__(self, init_config: dict):
        """Create the rental company's state containers from the initial configuration."""
        self.current_date: str = init_config.get("current_date", "2026-05-14")
        self.customers: dict[str, CustomerInfo] = init_config.get("customers", {})
        self.branches: dict[str, BranchInfo] = init_config.get("branches", {})
        self.vehicles: dict[str, VehicleInfo] = init_config.get("vehicles", {})
        self.reservations: dict[str, ReservationInfo] = init_config.get("reservations", {})
        self.next_reservation_number: int = init_config.get("next_reservation_number", 5000)

    # ------------------------------------------------------------------ helpers

    def _vehicle_conflict(self, vehicle_id: str, start: date, end: date, ignore_id: str | None) -> str | None:
        for reservation in self.reservations.values():
            if reservation["reservation_id"] == ignore_id or reservation["vehicle_id"] != vehicle_id:
                continue
            if reservation["status"] not in BLOCKING_STATUSES:
                continue
            other_start = date.fromisoformat(reservation["start_date"])
            other_end = date.fromisoformat(reservation["end_date"])
            if start < other_end and other_start < end:
                return reservation["reservation_id"]
        return None

    def _booking_error(
        self,
        customer_id: str,
        vehicle_id: str,
        start_date: str,
        end_date: str,
        return_branch_id: str,
        extras: list[str],
        ignore_id: str | None,
    ) -> str | None:
        """Why a booking is not allowed, or None when it is."""
        customer = self.customers.get(customer_id)
        if customer is None:
            return f"No customer with id {customer_id}."
        vehicle = self.vehicles.get(vehicle_id)
        if vehicle is None:
            return f"No vehicle with id {vehicle_id}."
        start = _parse_date(start_date)
        end = _parse_date(end_date)
        if start is None or end is None:
            return "Dates must be given as YYYY-MM-DD."
        today = date.fromisoformat(self.current_date)
        if start < today:
            return f"The start date {start_date} is in the past (today is {self.current_date})."
        days = (end - start).days
        if days < 1 or days > MAX_RENTAL_DAYS:
            return f"A rental lasts from 1 to {MAX_RENTAL_DAYS} days; {start_date} to {end_date} is {days}."
        if return_branch_id not in self.branches:
            return f"No branch with id {return_branch_id}."
        if vehicle["status"] == "maintenance":
            return f"Vehicle {vehicle_id} is in maintenance and cannot be reserved."
        age = _age_on(customer["date_of_birth"], start)
        if age < 21:
            return f"Drivers must be at least 21; {customer['name']} would be {age}."
        if age < 25 and vehicle["car_class"] in RESTRICTED_CLASSES_UNDER_25:
            return f"Drivers under 25 cannot rent {vehicle['car_class']} vehicles; {customer['name']} would be {age}."
        if customer["license_expiry"] < end_date:
            return (
                f"{customer['name']}'s driving licence expires on {customer['license_expiry']}, "
                f"before the end of the rental on {end_date}."
            )
        if return_branch_id != vehicle["branch_id"] and vehicle["car_class"] == "van":
            return "Vans must be returned to the branch they were picked up from."
        for extra in extras:
            if extra not in EXTRA_DAILY_PRICES:
                return f"Unknown extra {extra}. Extras: {', '.join(EXTRA_DAILY_PRICES)}."
        if len(set(extras)) != len(extras):
            return "Each extra can be booked only once."
        conflict = self._vehicle_conflict(vehicle_id, start, end, ignore_id)
        if conflict is not None:
            return f"Vehicle {vehicle_id} is already booked on those dates (reservation {conflict})."
        return None

    def _price(
        self,
        customer_id: str,
        vehicle_id: str,
        start_date: str,
        end_date: str,
        return_branch_id: str,
        extras: list[str],
    ) -> dict:
        vehicle = self.vehicles[vehicle_id]
        days = (date.fromisoformat(end_date) - date.fromisoformat(start_date)).days
        base = days * vehicle["daily_rate"]
        discount = base * GOLD_DISCOUNT if self.customers[customer_id]["loyalty_tier"] == "gold" else 0.0
        extras_total = sum(EXTRA_DAILY_PRICES[e] for e in extras) * days
        one_way = ONE_WAY_FEE if return_branch_id != vehicle["branch_id"] else 0.0
        total = round(base - discount + extras_total + one_way, 2)
        return {
            "days": days,
            "base": round(base, 2),
            "loyalty_discount": round(discount, 2),
            "extras": round(extras_total, 2),
            "one_way_fee": one_way,
            "total": total,
        }

    def _reprice(self, reservation: ReservationInfo) -> None:
        reservation["total_price"] = self._price(
            reservation["customer_id"],
            reservation["vehicle_id"],
            reservation["start_date"],
            reservation["end_date"],
            reservation["return_branch_id"],
            reservation["extras"],
        )["total"]

    # ------------------------------------------------------------------ queries

    def find_customers(self, query: str) -> dict:
        """Search customers whose name, email or phone contains the query (case-insensitive).

        Args:
            query: Part of a name, an email address or a phone number.
        """
        needle = query.strip().lower()
        if not needle:
            return {"success": False, "error": "The search query must not be empty."}
        matches = [
            c
            for c in self.customers.values()
            if needle in c["name"].lower() or needle in c["email"].lower() or needle in c["phone"]
        ]
        return {"success": True, "data": matches}

    def get_customer(self, customer_id: str) -> dict:
        """Get one customer's profile, including date of birth and driving licence.

        Args:
            customer_id: The customer's id, e.g. "C-201".
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        return {"success": True, "data": customer}

    def list_branches(self) -> dict:
        """List the rental branches."""
        return {"success": True, "data": list(self.branches.values())}

    def search_available_vehicles(
        self, branch_id: str, start_date: str, end_date: str, car_class: str | None = None
    ) -> dict:
        """List vehicles based at a branch that are free for the whole period.

        Args:
            branch_id: The pickup branch, e.g. "BR-1".
            start_date: First day of the rental, YYYY-MM-DD.
            end_date: Return day, YYYY-MM-DD.
            car_class: Only this class: economy, compact, suv, premium or van (optional).
        """
        if branch_id not in self.branches:
            return {"success": False, "error": f"No branch with id {branch_id}."}
        start = _parse_date(start_date)
        end = _parse_date(end_date)
        if start is None or end is None or end <= start:
            return {"success": False, "error": "Give a start date before the end date, as YYYY-MM-DD."}
        rows = []
        for vehicle in self.vehicles.values():
            if vehicle["branch_id"] != branch_id or vehicle["status"] == "maintenance":
                continue
            if car_class is not None and vehicle["car_class"] != car_class:
                continue
            if self._vehicle_conflict(vehicle["vehicle_id"], start, end, None) is None:
                rows.append(vehicle)
        return {"success": True, "data": rows}

    def get_vehicle(self, vehicle_id: str) -> dict:
        """Get one vehicle's details.

        Args:
            vehicle_id: The vehicle's id, e.g. "V-301".
        """
        vehicle = self.vehicles.get(vehicle_id)
        if vehicle is None:
            return {"success": False, "error": f"No vehicle with id {vehicle_id}."}
        return {"success": True, "data": vehicle}

    def get_reservation(self, reservation_id: str) -> dict:
        """Get one reservation.

        Args:
            reservation_id: The reservation's id, e.g. "R-5001".
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        return {"success": True, "data": reservation}

    def list_customer_reservations(self, customer_id: str) -> dict:
        """List every reservation of a customer.

        Args:
            customer_id: The customer's id.
        """
        if customer_id not in self.customers:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        rows = [r for r in self.reservations.values() if r["customer_id"] == customer_id]
        return {"success": True, "data": rows}

    def quote_rental(
        self,
        customer_id: str,
        vehicle_id: str,
        start_date: str,
        end_date: str,
        return_branch_id: str | None = None,
        extras: list[str] | None = None,
    ) -> dict:
        """Check that a rental is allowed and price it, without booking anything.

        Args:
            customer_id: The driver.
            vehicle_id: The vehicle.
            start_date: First day, YYYY-MM-DD.
            end_date: Return day, YYYY-MM-DD.
            return_branch_id: Where the car is returned, if not its own branch (optional).
            extras: Any of "gps", "child_seat", "additional_driver" (optional).
        """
        vehicle = self.vehicles.get(vehicle_id)
        if vehicle is None:
            return {"success": False, "error": f"No vehicle with id {vehicle_id}."}
        return_branch = return_branch_id or vehicle["branch_id"]
        chosen = list(extras or [])
        error = self._booking_error(customer_id, vehicle_id, start_date, end_date, return_branch, chosen, None)
        if error is not None:
            return {"success": False, "error": error}
        return {
            "success": True,
            "data": self._price(customer_id, vehicle_id, start_date, end_date, return_branch, chosen),
        }

    # ------------------------------------------------------------------ bookings

    def create_reservation(
        self,
        customer_id: str,
        vehicle_id: str,
        start_date: str,
        end_date: str,
        return_branch_id: str | None = None,
        extras: list[str] | None = None,
    ) -> dict:
        """Book a vehicle for a customer; pickup is at the vehicle's branch.

        Args:
            customer_id: The driver.
            vehicle_id: The vehicle to book.
            start_date: First day, YYYY-MM-DD.
            end_date: Return day, YYYY-MM-DD.
            return_branch_id: Where the car will be returned, if not its own branch (optional, one-way fee).
            extras: Any of "gps", "child_seat", "additional_driver" (optional).
        """
        vehicle = self.vehicles.get(vehicle_id)
        if vehicle is None:
            return {"success": False, "error": f"No vehicle with id {vehicle_id}."}
        return_branch = return_branch_id or vehicle["branch_id"]
        chosen = list(extras or [])
        error = self._booking_error(customer_id, vehicle_id, start_date, end_date, return_branch, chosen, None)
        if error is not None:
            return {"success": False, "error": error}
        reservation_id = f"R-{self.next_reservation_number}"
        self.next_reservation_number += 1
        reservation: ReservationInfo = {
            "reservation_id": reservation_id,
            "customer_id": customer_id,
            "vehicle_id": vehicle_id,
            "pickup_branch_id": vehicle["branch_id"],
            "return_branch_id": return_branch,
            "start_date": start_date,
            "end_date": end_date,
            "status": "confirmed",
            "extras": chosen,
            "total_price": 0.0,
            "cancellation_fee": 0.0,
            "odometer_out": None,
            "odometer_in": None,
        }
        self._reprice(reservation)
        self.reservations[reservation_id] = reservation
        return {
            "success": True,
            "data": {"reservation_id": reservation_id, "total_price": reservation["total_price"]},
        }

    def _confirmed(self, reservation_id: str) -> tuple[ReservationInfo | None, str | None]:
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return None, f"No reservation with id {reservation_id}."
        if reservation["status"] != "confirmed":
            return (
                None,
                f"Reservation {reservation_id} is {reservation['status']}; only confirmed ones can change.",
            )
        return reservation, None

    def change_reservation_dates(self, reservation_id: str, start_date: str, end_date: str) -> dict:
        """Move a confirmed reservation to new dates; the price is recomputed.

        Args:
            reservation_id: The reservation to change.
            start_date: New first day, YYYY-MM-DD.
            end_date: New return day, YYYY-MM-DD.
        """
        reservation, error = self._confirmed(reservation_id)
        if reservation is None:
            return {"success": False, "error": error}
        error = self._booking_error(
            reservation["customer_id"],
            reservation["vehicle_id"],
            start_date,
            end_date,
            reservation["return_branch_id"],
            reservation["extras"],
            reservation_id,
        )
        if error is not None:
            return {"success": False, "error": error}
        reservation["start_date"] = start_date
        reservation["end_date"] = end_date
        self._reprice(reservation)
        return {
            "success": True,
            "data": {"reservation_id": reservation_id, "total_price": reservation["total_price"]},
        }

    def change_reservation_vehicle(self, reservation_id: str, vehicle_id: str) -> dict:
        """Swap the vehicle of a confirmed reservation for another one at the same pickup branch.

        Args:
            reservation_id: The reservation to change.
            vehicle_id: The new vehicle.
        """
        reservation, error = self._confirmed(reservation_id)
        if reservation is None:
            return {"success": False, "error": error}
        vehicle = self.vehicles.get(vehicle_id)
        if vehicle is None:
            return {"success": False, "error": f"No vehicle with id {vehicle_id}."}
        if vehicle["branch_id"] != reservation["pickup_branch_id"]:
            return {"success": False, "error": f"Vehicle {vehicle_id} is not based at the pickup branch."}
        if vehicle_id == reservation["vehicle_id"]:
            return {"success": False, "error": f"Reservation {reservation_id} already uses {vehicle_id}."}
        error = self._booking_error(
            reservation["customer_id"],
            vehicle_id,
            reservation["start_date"],
            reservation["end_date"],
            reservation["return_branch_id"],
            reservation["extras"],
            reservation_id,
        )
        if error is not None:
            return {"success": False, "error": error}
        reservation["vehicle_id"] = vehicle_id
        self._reprice(reservation)
        return {
            "success": True,
            "data": {"reservation_id": reservation_id, "total_price": reservation["total_price"]},
        }

    def add_extra(self, reservation_id: str, extra: str) -> dict:
        """Add an extra (gps, child_seat or additional_driver) to a confirmed reservation.

        Args:
            reservation_id: The reservation to change.
            extra: "gps", "child_seat" or "additional_driver".
        """
        reservation, error = self._confirmed(reservation_id)
        if reservation is None:
            return {"success": False, "error": error}
        if extra not in EXTRA_DAILY_PRICES:
            return {
                "success": False,
                "error": f"Unknown extra {extra}. Extras: {', '.join(EXTRA_DAILY_PRICES)}.",
            }
        if extra in reservation["extras"]:
            return {"success": False, "error": f"Reservation {reservation_id} already has {extra}."}
        reservation["extras"].append(extra)
        self._reprice(reservation)
        return {
            "success": True,
            "data": {"reservation_id": reservation_id, "total_price": reservation["total_price"]},
        }

    def remove_extra(self, reservation_id: str, extra: str) -> dict:
        """Remove an extra from a confirmed reservation.

        Args:
            reservation_id: The reservation to change.
            extra: The extra to remove.
        """
        reservation, error = self._confirmed(reservation_id)
        if reservation is None:
            return {"success": False, "error": error}
        if extra not in reservation["extras"]:
            return {"success": False, "error": f"Reservation {reservation_id} has no {extra}."}
        reservation["extras"].remove(extra)
        self._reprice(reservation)
        return {
            "success": True,
            "data": {"reservation_id": reservation_id, "total_price": reservation["total_price"]},
        }

    def cancel_reservation(self, reservation_id: str) -> dict:
        """Cancel a confirmed reservation; free up to 2 days before pickup, else one day's rate is charged.

        Args:
            reservation_id: The reservation to cancel.
        """
        reservation, error = self._confirmed(reservation_id)
        if reservation is None:
            return {"success": False, "error": error}
        days_left = (date.fromisoformat(reservation["start_date"]) - date.fromisoformat(self.current_date)).days
        fee = 0.0 if days_left >= FREE_CANCELLATION_DAYS else self.vehicles[reservation["vehicle_id"]]["daily_rate"]
        reservation["status"] = "cancelled"
        reservation["cancellation_fee"] = fee
        return {"success": True, "data": {"reservation_id": reservation_id, "cancellation_fee": fee}}

    def start_rental(self, reservation_id: str) -> dict:
        """Hand over the car of a confirmed reservation on its start date.

        Args:
            reservation_id: The reservation being picked up.
        """
        reservation, error = self._confirmed(reservation_id)
        if reservation is None:
            return {"success": False, "error": error}
        if reservation["start_date"] != self.current_date:
            return {
                "success": False,
                "error": f"Reservation {reservation_id} starts on {reservation['start_date']}; "
                "pickup is only on the start date.",
            }
        vehicle = self.vehicles[reservation["vehicle_id"]]
        if vehicle["status"] != "available":
            return {"success": False, "error": f"Vehicle {vehicle['vehicle_id']} is {vehicle['status']}."}
        customer = self.customers[reservation["customer_id"]]
        if customer["license_expiry"] < reservation["end_date"]:
            return {
                "success": False,
                "error": f"{customer['name']}'s driving licence is not valid for the rental.",
            }
        vehicle["status"] = "rented"
        reservation["status"] = "active"
        reservation["odometer_out"] = vehicle["odometer_km"]
        return {"success": True, "message": f"Reservation {reservation_id} is active; vehicle handed over."}

    def return_vehicle(self, reservation_id: str, odometer_km: int) -> dict:
        """Check in the car of an active rental at its agreed return branch; late days are charged.

        Args:
            reservation_id: The active reservation.
            odometer_km: The odometer reading at return.
        """
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return {"success": False, "error": f"No reservation with id {reservation_id}."}
        if reservation["status"] != "active":
            return {
                "success": False,
                "error": f"Reservation {reservation_id} is {reservation['status']}, not active.",
            }
        if reservation["odometer_out"] is not None and odometer_km < reservation["odometer_out"]:
            return {"success": False, "error": "The odometer reading cannot be lower than at pickup."}
        vehicle = self.vehicles[reservation["vehicle_id"]]
        late_days = max(0, (date.fromisoformat(self.current_date) - date.fromisoformat(reservation["end_date"])).days)
        reservation["total_price"] = round(reservation["total_price"] + late_days * vehicle["daily_rate"], 2)
        reservation["status"] = "completed"
        reservation["odometer_in"] = odometer_km
        vehicle["odometer_km"] = odometer_km
        vehicle["status"] = "available"
        vehicle["branch_id"] = reservation["return_branch_id"]
        return {
            "success": True,
            "data": {
                "reservation_id": reservation_id,
                "late_days": late_days,
                "total_price": reservation["total_price"],
            },
        }

    def update_customer_license(self, customer_id: str, license_number: str, license_expiry: str) -> dict:
        """Record a customer's renewed driving licence; the new expiry must be later than the old one.

        Args:
            customer_id: The customer.
            license_number: The licence number on the new card.
            license_expiry: The new expiry date, YYYY-MM-DD.
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"No customer with id {customer_id}."}
        if _parse_date(license_expiry) is None:
            return {"success": False, "error": "The expiry date must be given as YYYY-MM-DD."}
        if license_expiry <= customer["license_expiry"] or license_expiry <= self.current_date:
            return {
                "success": False,
                "error": "A renewed licence must expire later than the current one and in the future.",
            }
        if not license_number.strip():
            return {"success": False, "error": "A licence number is required."}
        customer["license_number"] = license_number
        customer["license_expiry"] = license_expiry
        return {"success": True, "message": f"Driving licence of {customer_id} updated."}
